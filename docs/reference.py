"""The API reference: every public name of corvid, grouped as a user looks for it.

Each :class:`Page` becomes ``api/<slug>.md`` on the site: a table per section (name, the first line
of its docstring, and the numpy, PyTorch and JAX names of the same operation where there is one)
followed by the documentation of each name, generated from its docstring by Sphinx's autodoc.
``tests/test_docs.py`` checks that every public name is on exactly one page of its module.

Equivalents: numpy's come from numpy itself (a function of the same name), PyTorch's from the
names PyTorch has (``docs/equivalents.py``, recorded from torch 2.13), JAX's from ``jax.numpy``
mirroring numpy; :data:`EQUIVALENTS` corrects the names that differ.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import types

import numpy as np

from .equivalents import TORCH

# --- the pages ------------------------------------------------------------------------------------------

ELEMENTWISE_DTYPES = (
    "Every dtype the operation has a meaning for: booleans, signed and unsigned integers, float16, "
    "bfloat16 and the two float8 types (computed in float32 and rounded once), float32, float64, and "
    "complex64/complex128 where the function is defined on complex numbers. Every device runs them "
    "(CPU, CL, CUDA, WEBGPU; WEBGPU has no float64 or complex128). Type promotion follows the Array API "
    "standard (an integer tensor with a float Python scalar gives the default float dtype).")


@dataclasses.dataclass
class Section:
    title: str
    names: list[str]
    text: str = ""


@dataclasses.dataclass
class Page:
    slug: str
    title: str
    module: str  # where the names are looked up ("corvid.Tensor" for the methods)
    intro: str
    sections: list[Section]


def _s(title: str, names: str, text: str = "") -> Section:
    return Section(title, names.split(), text)


PAGES: list[Page] = [
    Page("arrays", "Arrays: creating them, dtypes and devices", "corvid",
         "The ``corvid`` namespace (``import corvid as cv``) follows the Python Array API standard "
         "(2024.12), and numpy where the standard is silent. Arrays are :class:`corvid.Tensor` "
         "objects: lazy, computed when a value is needed (``.numpy()``, ``.item()``, printing, "
         ":func:`corvid.realize`).", [
             _s("The array type", "Tensor asarray from_dlpack realize"),
             _s("Creating arrays", "arange linspace eye zeros ones empty full zeros_like ones_like empty_like "
                "full_like meshgrid complex"),
             _s("Random numbers (global generator)", "manual_seed rand randn randint",
                "Key-based, reproducible draws are in :doc:`random`."),
             _s("Data types", "DType bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 "
                "float32 float64 float8_e4m3fn float8_e5m2 complex64 complex128 ALL_DTYPES astype can_cast "
                "result_type promote_types finfo iinfo isdtype"),
             _s("Devices and execution", "devices default_device get_default_device set_default_device empty_cache beam profile "
                "autocast set_float32_matmul_precision get_float32_matmul_precision matmul_precision "
                "set_flush_denormal flush_denormal"),
             _s("Constants", "e pi inf nan newaxis"),
             _s("Errors", "ShapeError AxisError ArgumentError"),
         ]),
    Page("math", "Elementwise math", "corvid", ELEMENTWISE_DTYPES, [
        _s("Arithmetic", "add subtract multiply divide floor_divide remainder pow negative positive reciprocal "
           "abs sign square sqrt clip copysign hypot nextafter frac nan_to_num"),
        _s("Exponents and logarithms", "exp expm1 log log1p log2 log10 logaddexp"),
        _s("Trigonometric and hyperbolic", "sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh"),
        _s("Rounding", "round floor ceil trunc"),
        _s("Special functions", "erf erfc erfinv lgamma digamma i0"),
        _s("Complex numbers", "real imag conj"),
        _s("Comparison and tests", "equal not_equal less less_equal greater greater_equal maximum minimum "
           "isfinite isinf isnan signbit isin"),
        _s("Logic and bits", "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor "
           "bitwise_invert bitwise_left_shift bitwise_right_shift"),
        _s("Choosing", "where"),
    ]),
    Page("reductions", "Reductions, scans, sorting and searching", "corvid",
         "Reductions sum with pairwise (tree) accumulation in a wider type, so their error does not grow "
         "with the length of the axis; integer sums accumulate in int64 (uint64 for unsigned). Every "
         "device runs them.", [
             _s("Reductions", "sum prod mean var std max min all any count_nonzero argmax argmin"),
             _s("Cumulative operations", "cumsum cumprod cumulative_sum cumulative_prod cummax cummin logcumsumexp diff"),
             _s("Sorting", "sort argsort topk"),
             _s("Searching", "searchsorted nonzero"),
             _s("Sets", "unique_all unique_counts unique_inverse unique_values"),
         ]),
    Page("shapes", "Shapes, movement and indexing", "corvid",
         "Movement operations (reshape, permute, expand, flip, slicing, padding) never copy: they change how "
         "the next kernel reads memory. Indexing follows numpy (basic, integer-array and boolean indexing) on "
         "``Tensor.__getitem__``; the functions here are the explicit forms.", [
             _s("Changing shape", "reshape squeeze expand_dims broadcast_to broadcast_arrays broadcast_shapes"),
             _s("Reordering", "permute_dims matrix_transpose moveaxis swapaxes flip roll rot90"),
             _s("Joining and splitting", "concat cat stack unstack tile repeat"),
             _s("Triangles and diagonals", "tril triu diag diagonal trace"),
             _s("Gathering and scattering", "take take_along_axis put_along_axis gather scatter scatter_reduce "
                "index_select"),
         ]),
    Page("products", "Products and neural-network operations", "corvid",
         "Matrix products run as register-tiled kernels (float16/bfloat16 inputs accumulate in float32). "
         "Convolutions and pooling take channels-first inputs as PyTorch's do; their module forms are in "
         ":doc:`nn`.", [
             _s("Products", "matmul tensordot vecdot einsum"),
             _s("Convolution", "conv conv1d conv2d conv3d conv_transpose conv_transpose1d conv_transpose2d "
                "conv_transpose3d"),
             _s("Pooling", "max_pool max_pool1d max_pool2d max_pool3d avg_pool avg_pool1d avg_pool2d avg_pool3d "
                "adaptive_avg_pool adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool "
                "adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d"),
             _s("Resampling", "interpolate"),
         ]),
    Page("transforms", "Autodiff and transforms", "corvid",
         "Two styles that compose: PyTorch's (``requires_grad``, ``Tensor.backward``, ``no_grad``) and "
         "JAX's function transforms (``grad``, ``jvp``, ``vmap``, ``jit``). See the "
         ":doc:`../tutorials/autodiff` tutorial.", [
             _s("Reverse mode", "grad value_and_grad vjp jacrev"),
             _s("Forward mode", "jvp jacfwd hessian"),
             _s("Batching and compiling", "vmap jit"),
             _s("Custom rules and memory", "custom_jvp custom_vjp checkpoint stop_gradient"),
             _s("Gradient mode", "no_grad enable_grad is_grad_enabled"),
         ]),
    Page("io", "Saving and loading", "corvid",
         "Files are safetensors: a JSON header and raw little-endian data. Loading parses the header, "
         "checks every offset and never executes code.", [
             _s("Files", "save load safe_open CorruptFileError"),
         ]),
    Page("tensor", "The Tensor", "corvid.Tensor",
         "``Tensor`` methods speak PyTorch: a method with a namespace function of the same name computes the "
         "same thing, but takes PyTorch's arguments (``dim=``, ``keepdim=``) and returns PyTorch's forms "
         "(``x.max(0)`` is ``(values, indices)``, ``x.var()`` is unbiased); see :doc:`../pytorch` for every "
         "difference. Arithmetic operators (``+``, ``@``, ``//``, comparisons) and indexing follow numpy.", []),
    Page("linalg", "Linear algebra: corvid.linalg", "corvid.linalg",
         "The Array API's ``linalg`` extension and more. Factorizations run on LAPACK on the CPU by default, "
         "or as corvid kernels on every device (:func:`corvid.linalg.use_backend`); float32, float64, "
         "complex64 and complex128, batched over leading dimensions, differentiable.", [
             _s("Products", "matmul tensordot vecdot outer cross matrix_power"),
             _s("Solving and inverting", "solve inv pinv lstsq"),
             _s("Factorizations", "cholesky qr eigh eigvalsh eig eigvals svd svdvals QRResult EighResult EigResult "
                "SVDResult"),
             _s("Norms and numbers", "norm vector_norm matrix_norm det slogdet SlogdetResult cond matrix_rank trace "
                "diagonal matrix_transpose"),
             _s("Backends and errors", "use_backend set_backend get_backend LinAlgError"),
         ]),
    Page("fft", "Fourier transforms: corvid.fft", "corvid.fft",
         "The Array API's ``fft`` extension, computed by corvid kernels (mixed-radix; Bluestein for large "
         "prime lengths) on complex64/complex128; real inputs are promoted. ``norm`` is ``\"backward\"`` "
         "(default), ``\"ortho\"`` or ``\"forward\"`` as in numpy.", [
             _s("Complex transforms", "fft ifft fft2 ifft2 fftn ifftn"),
             _s("Real and Hermitian transforms", "rfft irfft rfftn irfftn hfft ihfft"),
             _s("Frequencies", "fftfreq rfftfreq fftshift ifftshift"),
         ]),
    Page("random", "Random numbers: corvid.random", "corvid.random",
         "Counter-based (Threefry-2x32) random numbers computed inside kernels: the same key or seed gives the "
         "same numbers on every device and schedule. Key functions (JAX style) are reproducible per key; the "
         "global generator (PyTorch style) is one stream seeded with ``manual_seed``.", [
             _s("Keys", "key PRNGKey split fold_in"),
             _s("Draws from a key", "uniform normal truncated_normal bernoulli categorical permutation randint_key"),
             _s("The global generator", "manual_seed rand randn randint"),
             _s("Raw bits", "random_bits threefry2x32"),
         ]),
    Page("nn", "Layers: corvid.nn", "corvid.nn",
         "Modules as PyTorch's: ``Module`` subclasses with parameters, ``state_dict``, ``train()``/``eval()`` "
         "and hooks; the same constructor arguments and initializations.", [
             _s("Building blocks", "Module Parameter Sequential ModuleList ModuleDict Identity Flatten Unflatten "
                "functional_call IncompatibleKeys"),
             _s("Linear and embedding", "Linear Embedding GatedMLP"),
             _s("Convolution", "Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d Upsample"),
             _s("Pooling", "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d "
                "AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d "
                "MaxUnpool1d MaxUnpool2d MaxUnpool3d"),
             _s("Normalization and dropout", "BatchNorm1d BatchNorm2d BatchNorm3d LayerNorm GroupNorm RMSNorm "
                "GemmaRMSNorm InstanceNorm1d InstanceNorm2d InstanceNorm3d Dropout"),
             _s("Activations", "ReLU ReLU6 LeakyReLU PReLU ELU CELU SELU GELU SiLU Mish Sigmoid LogSigmoid Tanh "
                "Hardtanh Hardsigmoid Hardswish Softplus Softsign Softmax Softmin LogSoftmax"),
             _s("Attention and recurrent layers", "MultiheadAttention CausalSelfAttention RotaryEmbedding RNN LSTM GRU "
                "RNNCell LSTMCell GRUCell"),
             _s("LoRA", "LoRALinear", "Low-rank adapters on linear layers; :doc:`lora` has the functions that put "
                "them on a model, merge, save and load them."),
             _s("Losses", "MSELoss L1Loss SmoothL1Loss HuberLoss CrossEntropyLoss NLLLoss BCELoss BCEWithLogitsLoss "
                "KLDivLoss CTCLoss CosineEmbeddingLoss MarginRankingLoss TripletMarginLoss"),
             _s("Loss functions", "mse_loss l1_loss smooth_l1_loss huber_loss cross_entropy nll_loss "
                "binary_cross_entropy binary_cross_entropy_with_logits kl_div ctc_loss cosine_embedding_loss "
                "margin_ranking_loss triplet_margin_loss"),
         ]),
    Page("functional", "Functions: corvid.nn.functional", "corvid.nn.functional",
         "The functional forms of :doc:`nn`, as ``torch.nn.functional``'s (import it as ``F``).", [
             _s("Linear, embedding and attention", "linear embedding one_hot scaled_dot_product_attention "
                "apply_rotary_emb"),
             _s("Convolution and pooling", "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d "
                "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d "
                "adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d "
                "max_unpool1d max_unpool2d max_unpool3d pad interpolate"),
             _s("Normalization and dropout", "batch_norm layer_norm group_norm rms_norm instance_norm normalize dropout"),
             _s("Activations", "relu relu6 leaky_relu prelu elu celu selu gelu silu mish sigmoid logsigmoid tanh "
                "hardtanh hardsigmoid hardswish softplus softsign softmax softmin log_softmax"),
             _s("Losses", "mse_loss l1_loss smooth_l1_loss huber_loss cross_entropy nll_loss binary_cross_entropy "
                "binary_cross_entropy_with_logits kl_div ctc_loss cosine_embedding_loss margin_ranking_loss "
                "triplet_margin_loss"),
         ]),
    Page("init", "Initialization: corvid.nn.init", "corvid.nn.init",
         "In-place initializers of parameters, as ``torch.nn.init``'s.", [
             _s("Initializers", "uniform_ normal_ trunc_normal_ constant_ zeros_ ones_ xavier_uniform_ xavier_normal_ "
                "glorot_uniform_ glorot_normal_ kaiming_uniform_ kaiming_normal_ orthogonal_ calculate_gain"),
         ]),
    Page("lora", "LoRA adapters: corvid.nn.lora", "corvid.nn.lora",
         "Fine-tune a model's linear layers through low-rank adapters while its weights stay frozen: "
         "``apply_lora(model, r=8, alpha=16, target=(\"q_proj\", \"v_proj\"))`` wraps the matching ``Linear`` "
         "layers in ``LoRALinear`` and freezes the rest; the adapters train, are saved and loaded alone, and "
         "``merge_lora`` folds them into the weights. ``examples/lora.py`` fine-tunes a small "
         ":class:`corvid.models.CausalLM` this way.", [
             _s("Adapters", "apply_lora LoRALinear merge_lora"),
             _s("Saving and loading", "lora_state_dict save_lora load_lora"),
         ]),
    Page("quant", "Weight-only quantization: corvid.quant", "corvid.quant",
         "``cv.quantize(model, \"int8\" | \"int4\", group_size=128, skip=None, embeddings=False)`` replaces "
         "the ``Linear`` layers of a model by ``QuantizedLinear`` layers (and with ``embeddings=True`` its "
         "``Embedding`` layers by ``QuantizedEmbedding``, which a tied output head reads), in place: int8 or "
         "packed int4 weights with a float32 scale per group of inputs (symmetric, no zero points), stored in "
         "interleaved blocks of 64 output rows, unpacked and scaled inside the kernel of the product (one "
         "kernel for a token at a time). Quantized state dicts save and load as safetensors. "
         "``examples/quantize.py`` measures the perplexity of a small :class:`corvid.models.CausalLM` in "
         "float32, bfloat16, int8 and int4, and the speed of the products.", [
             _s("Quantizing models", "quantize QuantizedLinear QuantizedEmbedding"),
             _s("Quantized weights", "quantize_weight dequantize_weight pack_int4 unpack_int4"),
             _s("The stored layout", "block_rows blocked row_major"),
             _s("Settings", "MODES DEFAULT_GROUP_SIZE MATMUL_ROWS BLOCK_ROWS"),
             _s("State dicts", "load_hints"),
         ]),
    Page("models", "Language models: corvid.models", "corvid.models",
         "Pretrained decoder-only language models (Llama 2/3/3.1, Mistral, Qwen2, Phi-3, Gemma, Gemma 2) loaded "
         "from Hugging Face checkpoint folders (``config.json`` and safetensors weights), with the building "
         "blocks of :doc:`nn` (``RotaryEmbedding``, ``CausalSelfAttention``, ``GatedMLP``, ``GemmaRMSNorm``). "
         "``CausalLM.generate`` and ``CausalLM.stream`` continue prompts (greedy, or sampled with a key) with a "
         "static key/value cache and one compiled decode step replayed for every token; "
         "``examples/llm.py`` runs a checkpoint folder from the command line.", [
             _s("Loading checkpoints", "from_pretrained"),
             _s("Models", "CausalLM CausalLMConfig Decoder DecoderLayer"),
             _s("Generation", "KVCache sample"),
         ]),
    Page("optim", "Optimizers: corvid.optim", "corvid.optim",
         "Optimizers as PyTorch's (``zero_grad``, ``step``, ``state_dict``, parameter groups), whose update "
         "runs as one fused kernel per step; ``Functional`` gives them a JAX-style pure form for ``jit``.", [
             _s("Optimizers", "SGD Adam AdamW RMSprop Adagrad Lion LAMB Optimizer Functional"),
             _s("Gradient clipping", "clip_grad_norm_ clip_grad_value_"),
             _s("Optimizer state", "flatten_state_dict unflatten_state_dict"),
         ]),
    Page("lr_scheduler", "Learning-rate schedules: corvid.optim.lr_scheduler", "corvid.optim.lr_scheduler",
         "Schedules as PyTorch's: call ``step()`` once per epoch (or per batch for ``OneCycleLR``).", [
             _s("Schedules", "LRScheduler StepLR MultiStepLR ExponentialLR CosineAnnealingLR LinearLR LambdaLR "
                "OneCycleLR SequentialLR ReduceLROnPlateau"),
         ]),
    Page("amp", "Mixed precision: corvid.amp", "corvid.amp",
         "``autocast`` runs matrix products and convolutions in bfloat16 or float16 and keeps norms, softmax "
         "and losses in float32; the scalers keep float16 gradients from underflowing.", [
             _s("Mixed precision", "autocast autocast_dtype GradScaler DynamicLossScale"),
             _s("Float32 products", "set_float32_matmul_precision get_float32_matmul_precision matmul_precision"),
         ]),
    Page("data", "Data: corvid.data", "corvid.data",
         "Datasets and a loader as PyTorch's; see the :doc:`../tutorials/own-data` tutorial.", [
             _s("Datasets", "Dataset TensorDataset ArrayDataset Subset MNIST FashionMNIST"),
             _s("Loading", "DataLoader default_collate"),
             _s("Files and downloads", "data_dir download_file ChecksumError read_idx parse_idx"),
         ]),
    Page("plot", "Plots: corvid.plot", "corvid.plot",
         "Charts of tensors drawn with matplotlib (``pip install \"corvid[plot]\"``); each function returns "
         "the matplotlib ``Axes`` it drew on.", [
             _s("Charts", "line scatter bar hist errorbar fill_between"),
             _s("Images and fields", "imshow image_grid heatmap contour surface"),
             _s("Figures and style", "subplots savefig theme PALETTE STYLE"),
         ]),
    Page("notebook", "Notebooks: corvid.notebook", "corvid.notebook",
         "Markdown files whose python blocks are cells (see the :doc:`../tutorials/plots-notebooks` tutorial).", [
             _s("Running", "run clean watch RunReport"),
             _s("The format", "parse Notebook Cell Output"),
             _s("Jupyter", "to_ipynb from_ipynb"),
             _s("The editor and sharing", "edit to_html"),
         ]),
    Page("distributed", "Several processes: corvid.distributed", "corvid.distributed",
         "Data-parallel training over MPI (``mpirun -n N python train.py``; ``pip install "
         "\"corvid[distributed]\"``); see :doc:`../distributed`.", [
             _s("Processes", "init is_initialized rank world_size barrier"),
             _s("Collectives", "all_reduce broadcast all_reduce_gradients broadcast_parameters"),
             _s("Data and checkpoints", "DistributedSampler save_checkpoint load_checkpoint"),
         ]),
]

# Tensor methods, grouped: a method whose namespace function is on a page goes to that page's
# section name here; the rest are listed explicitly
TENSOR_SECTIONS: list[Section] = [
    _s("Values and metadata", "shape dtype device ndim size numel nelement dim ndimension itemsize element_size nbytes "
       "stride is_contiguous is_complex is_floating_point is_leaf requires_grad grad node numpy tolist item realize "
       "schedule contiguous"),
    _s("Devices and casts", "to to_device cpu astype type_as bitcast float double half bfloat16 int long short char "
       "byte bool cfloat cdouble"),
    _s("Creating from a tensor", "clone new_tensor new_empty new_zeros new_ones new_full"),
    _s("Autograd", "backward detach requires_grad_ assign"),
]


# PyTorch's methods with no namespace function of the same name, by kind (after the namespace's groups)
TENSOR_TAIL: list[Section] = [
    _s("PyTorch's arithmetic", "absolute neg sub rsub mul div true_divide fmod addcdiv addcmul lerp xlogy rsqrt exp2 "
       "sgn angle deg2rad rad2deg fmax fmin clamp clamp_min clamp_max bitwise_not"),
    _s("PyTorch's comparisons", "eq ne lt le gt ge isclose allclose isposinf isneginf"),
    _s("PyTorch's reductions", "amax amin aminmax logsumexp nansum nanmean std_mean var_mean"),
    _s("PyTorch's products", "mm bmm mv dot outer addmm kron cross"),
    _s("Neural-network functions", "relu gelu silu sigmoid softplus softmax log_softmax"),
    _s("PyTorch's shapes and views", "view view_as reshape_as flatten unflatten unsqueeze expand expand_as permute "
       "transpose swapdims movedim t T mT H mH adjoint fliplr flipud narrow select unbind chunk split tensor_split "
       "unfold pad shrink shard"),
    _s("PyTorch's indexing and selection", "masked_fill masked_select index_add index_copy index_fill scatter_add "
       "take_along_dim argwhere unique repeat_interleave"),
]


def public_names(module: str) -> list[str]:
    """The public names of ``module`` (its ``__all__``, else what it has without a leading
    underscore), submodules left out; for ``"corvid.Tensor"``, the methods and properties."""
    if module == "corvid.Tensor":
        import corvid

        return [n for n in dir(corvid.Tensor) if not n.startswith("_")]
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_")]
    return [n for n in names if not isinstance(getattr(mod, n), types.ModuleType)]


def tensor_sections() -> list[Section]:
    """The Tensor page's sections: the explicit ones, then one per namespace section holding the
    methods of the same name, then the PyTorch-only methods by kind."""
    import corvid

    placed = {n for s in TENSOR_SECTIONS for n in s.names}
    methods = [n for n in public_names("corvid.Tensor") if n not in placed]
    out = list(TENSOR_SECTIONS)
    for page in PAGES:
        if page.module != "corvid":
            continue
        for sec in page.sections:
            names = [n for n in sec.names if n in methods and n not in placed]
            if names:
                out.append(Section(sec.title, names, f"The method forms of :doc:`{page.slug}` functions."))
                placed.update(names)
    for sec in TENSOR_TAIL:
        names = [n for n in sec.names if n in methods and n not in placed]
        if names:
            out.append(Section(sec.title, names))
            placed.update(names)
    rest = [n for n in methods if n not in placed]
    groups = {"In place": [n for n in rest if n.endswith("_")]}
    groups["Other methods"] = [n for n in rest if not n.endswith("_")]
    out += [Section(t, ns) for t, ns in groups.items() if ns]
    _ = corvid
    return out


def sections(page: Page) -> list[Section]:
    return tensor_sections() if page.module == "corvid.Tensor" else page.sections


# --- equivalents ------------------------------------------------------------------------------------------

# (numpy, PyTorch, JAX) for the names whose equivalents the rules get wrong; "" for none
EQUIVALENTS: dict[str, tuple[str, str, str]] = {
    "corvid.Tensor": ("np.ndarray", "torch.Tensor", "jax.Array"),
    "corvid.asarray": ("np.asarray", "torch.as_tensor", "jnp.asarray"),
    "corvid.concat": ("np.concatenate", "torch.cat", "jnp.concatenate"),
    "corvid.cat": ("np.concatenate", "torch.cat", "jnp.concatenate"),
    "corvid.permute_dims": ("np.transpose", "torch.permute", "jnp.transpose"),
    "corvid.unstack": ("np.unstack", "torch.unbind", "jnp.unstack"),
    "corvid.pow": ("np.pow", "torch.pow", "jnp.pow"),
    "corvid.clip": ("np.clip", "torch.clamp", "jnp.clip"),
    "corvid.realize": ("", "", "jax.block_until_ready"),
    "corvid.manual_seed": ("np.random.seed", "torch.manual_seed", ""),
    "corvid.rand": ("np.random.rand", "torch.rand", ""),
    "corvid.randn": ("np.random.randn", "torch.randn", ""),
    "corvid.randint": ("np.random.randint", "torch.randint", ""),
    "corvid.grad": ("", "torch.func.grad", "jax.grad"),
    "corvid.value_and_grad": ("", "torch.func.grad_and_value", "jax.value_and_grad"),
    "corvid.vjp": ("", "torch.func.vjp", "jax.vjp"),
    "corvid.jvp": ("", "torch.func.jvp", "jax.jvp"),
    "corvid.jacrev": ("", "torch.func.jacrev", "jax.jacrev"),
    "corvid.jacfwd": ("", "torch.func.jacfwd", "jax.jacfwd"),
    "corvid.hessian": ("", "torch.func.hessian", "jax.hessian"),
    "corvid.vmap": ("", "torch.vmap", "jax.vmap"),
    "corvid.jit": ("", "torch.compile", "jax.jit"),
    "corvid.custom_jvp": ("", "", "jax.custom_jvp"),
    "corvid.custom_vjp": ("", "torch.autograd.Function", "jax.custom_vjp"),
    "corvid.checkpoint": ("", "torch.utils.checkpoint.checkpoint", "jax.checkpoint"),
    "corvid.stop_gradient": ("", "torch.Tensor.detach", "jax.lax.stop_gradient"),
    "corvid.no_grad": ("", "torch.no_grad", ""),
    "corvid.enable_grad": ("", "torch.enable_grad", ""),
    "corvid.save": ("", "safetensors.torch.save_file", ""),
    "corvid.load": ("", "safetensors.torch.load_file", ""),
    "corvid.safe_open": ("", "safetensors.safe_open", ""),
    "corvid.models.from_pretrained": ("", "transformers.AutoModelForCausalLM.from_pretrained", ""),
    "corvid.models.KVCache": ("", "transformers.StaticCache", ""),
    "corvid.from_dlpack": ("np.from_dlpack", "torch.from_dlpack", "jax.dlpack.from_dlpack"),
    "corvid.devices": ("", "", "jax.devices"),
    "corvid.empty_cache": ("", "torch.cuda.empty_cache", ""),
    "corvid.default_device": ("", "torch.device", "jax.default_device"),
    "corvid.autocast": ("", "torch.autocast", ""),
    "corvid.set_float32_matmul_precision": ("", "torch.set_float32_matmul_precision",
                                            "jax.config.update('jax_default_matmul_precision', ...)"),
    "corvid.get_float32_matmul_precision": ("", "torch.get_float32_matmul_precision", ""),
    "corvid.set_flush_denormal": ("", "torch.set_flush_denormal", ""),
    "corvid.matmul_precision": ("", "", "jax.default_matmul_precision"),
    "corvid.gather": ("", "torch.gather", ""),
    "corvid.scatter": ("", "torch.scatter", ""),
    "corvid.index_select": ("", "torch.index_select", ""),
    "corvid.conv": ("", "", "jax.lax.conv_general_dilated"),
    "corvid.interpolate": ("", "torch.nn.functional.interpolate", "jax.image.resize"),
    "corvid.einsum": ("np.einsum", "torch.einsum", "jnp.einsum"),
    "corvid.erf": ("", "torch.erf", "jax.scipy.special.erf"),
    "corvid.erfc": ("", "torch.erfc", "jax.scipy.special.erfc"),
    "corvid.erfinv": ("", "torch.erfinv", "jax.scipy.special.erfinv"),
    "corvid.lgamma": ("", "torch.lgamma", "jax.lax.lgamma"),
    "corvid.digamma": ("", "torch.digamma", "jax.lax.digamma"),
    "corvid.logcumsumexp": ("", "torch.logcumsumexp", ""),
    "corvid.topk": ("", "torch.topk", "jax.lax.top_k"),
    "corvid.bitwise_invert": ("np.bitwise_invert", "torch.bitwise_not", "jnp.bitwise_invert"),
}
for _n in ("key", "PRNGKey", "split", "fold_in", "uniform", "normal", "truncated_normal", "bernoulli",
           "categorical", "permutation", "bits"):
    EQUIVALENTS[f"corvid.random.{_n}"] = ("", "", f"jax.random.{_n}")
EQUIVALENTS["corvid.random.randint_key"] = ("", "", "jax.random.randint")
EQUIVALENTS["corvid.random.random_bits"] = ("", "", "jax.random.bits")


def equivalents(module: str, name: str) -> tuple[str, str, str]:
    """(numpy, PyTorch, JAX) names of ``module.name``'s operation, "" where there is none."""
    full = f"{module}.{name}"
    if full in EQUIVALENTS:
        return EQUIVALENTS[full]
    numpy_mod, jax_mod, torch_mod = {
        "corvid": ("np", "jnp", "torch"), "corvid.linalg": ("np.linalg", "jnp.linalg", "torch.linalg"),
        "corvid.fft": ("np.fft", "jnp.fft", "torch.fft"), "corvid.Tensor": ("np.ndarray", "", "torch.Tensor"),
        "corvid.nn": ("", "", "torch.nn"), "corvid.nn.functional": ("", "", "torch.nn.functional"),
        "corvid.nn.init": ("", "", "torch.nn.init"), "corvid.optim": ("", "", "torch.optim"),
        "corvid.optim.lr_scheduler": ("", "", "torch.optim.lr_scheduler"), "corvid.data": ("", "", "torch.utils.data"),
        "corvid.amp": ("", "", "torch.amp"),
    }.get(module, ("", "", ""))
    np_name = jax_name = ""
    if numpy_mod:
        target = np.ndarray if module == "corvid.Tensor" else importlib.import_module(numpy_mod.replace("np", "numpy", 1))
        if hasattr(target, name) and not name.startswith("_"):
            np_name = f"{numpy_mod}.{name}"
            jax_name = f"{jax_mod}.{name}" if jax_mod else ""
    torch_name = f"{torch_mod}.{name}" if torch_mod and name in TORCH.get(module, ()) else ""
    return np_name, torch_name, jax_name


# --- writing the pages ------------------------------------------------------------------------------------


def summary(obj: object) -> str:
    """The first sentence of ``obj``'s docstring, for a table cell."""
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip()
    end = first.find(". ")
    first = first[: end + 1] if end >= 0 else first
    first = re.sub(r":(\w+):`", r"{py:\1}`", first)  # reST roles in MyST's spelling
    return first.replace("|", "\\|")


def _lookup(module: str, name: str) -> object:
    if module == "corvid.Tensor":
        import corvid

        return inspect.getattr_static(corvid.Tensor, name)
    return getattr(importlib.import_module(module), name)


def _directive(module: str, name: str, obj: object) -> str:
    full = f"{module}.{name}"
    if module == "corvid.Tensor":
        kind = ("autoproperty" if isinstance(obj, property) else
                "autoattribute" if isinstance(obj, types.MemberDescriptorType) else "automethod")
        return f".. {kind}:: {full}\n"
    if full == "corvid.Tensor":  # its methods are on the Tensor page
        return f".. autoclass:: {full}\n   :no-index:\n   :no-members:\n"
    if isinstance(obj, type):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {full}\n"
        return f".. autoclass:: {full}\n   :members:\n   :exclude-members: {_EXCLUDE}\n"
    if callable(obj) and not _is_value(obj):
        return f".. autofunction:: {full}\n"
    return f".. py:data:: {name}\n   :module: {module}\n\n   {VALUES[full]}\n"


_EXCLUDE = "__init__, __call__, forward, extra_repr, count, index"


def _is_value(obj: object) -> bool:
    import corvid

    if isinstance(obj, (property, types.MemberDescriptorType, types.GetSetDescriptorType)):
        return False  # a Tensor property: documented by its getter
    return isinstance(obj, corvid.DType) or not callable(obj)


# what the values that cannot carry a docstring are
VALUES: dict[str, str] = {
    "corvid.e": "Euler's number, 2.718281828459045 (a Python float).",
    "corvid.pi": "π, 3.141592653589793 (a Python float).",
    "corvid.inf": "Positive infinity (a Python float).",
    "corvid.nan": "Not a number (a Python float).",
    "corvid.newaxis": "``None``: ``x[:, cv.newaxis]`` inserts an axis of length 1.",
    "corvid.ALL_DTYPES": "Every dtype corvid has, as a tuple of :class:`corvid.DType`.",
    "corvid.bool": "Booleans (``True``/``False``), stored as one byte.",
    "corvid.plot.PALETTE": "The colours the charts cycle through (hex strings), chosen to stay distinct for "
                           "colour-blind readers.",
    "corvid.plot.STYLE": "The matplotlib settings :func:`corvid.plot.theme` applies (a dict of rcParams).",
    "corvid.quant.MODES": "The quantization modes, ``(\"int8\", \"int4\")``: a byte a weight, or two weights a byte.",
    "corvid.quant.DEFAULT_GROUP_SIZE": "128: the inputs that share a scale unless ``group_size`` says otherwise.",
    "corvid.quant.BLOCK_ROWS": "64: the output rows a block of the stored layout interleaves (when they divide "
                               "the row count; else the largest power of two that does).",
    "corvid.quant.MATMUL_ROWS": "32: from this many input rows on, a ``QuantizedLinear`` dequantizes its weight once "
                                "per call and runs the float matmul's tiled kernel; with fewer it computes from "
                                "the packed weights (one kernel below 8 rows).",
}
for _bits, _kinds in ((8, "int uint"), (16, "int uint float"), (32, "int uint float"), (64, "int uint float")):
    for _k in _kinds.split():
        VALUES[f"corvid.{_k}{_bits}"] = {
            "int": f"Signed {_bits}-bit integers (two's complement; arithmetic wraps on overflow).",
            "uint": f"Unsigned {_bits}-bit integers (arithmetic wraps modulo 2**{_bits}).",
            "float": f"IEEE 754 binary{_bits} floating point.",
        }[_k]
VALUES.update({
    "corvid.bfloat16": "Brain floating point: float32's 8-bit exponent with a 7-bit mantissa (ml_dtypes' bfloat16). "
                       "Arithmetic is computed in float32 and rounded to nearest even once.",
    "corvid.float8_e4m3fn": "8-bit float with 4 exponent and 3 mantissa bits, finite (no infinities; one NaN "
                            "pattern per sign), as ml_dtypes'. Computed in float32.",
    "corvid.float8_e5m2": "8-bit float with 5 exponent and 2 mantissa bits (IEEE-like, with infinities), as "
                          "ml_dtypes'. Computed in float32.",
    "corvid.complex64": "Complex numbers of two float32 parts.",
    "corvid.complex128": "Complex numbers of two float64 parts.",
})


def _cell(text: str) -> str:
    return f"`{text}`" if text else "–"


def _ref(module: str, name: str, obj: object) -> str:
    full = f"{module}.{name}"
    label = full.replace("corvid.", "cv.", 1) if module != "corvid.Tensor" else f"Tensor.{name}"
    if module == "corvid.Tensor":
        role = "py:attr" if isinstance(obj, (property, types.MemberDescriptorType)) else "py:meth"
    elif isinstance(obj, type):
        role = "py:exc" if issubclass(obj, BaseException) else "py:class"
    elif _is_value(obj):
        role = "py:data"
    else:
        role = "py:func"
    return f"{{{role}}}`{label} <{full}>`"


def page_markdown(page: Page) -> str:
    out = [f"# {page.title}\n", "```{eval-rst}", page.intro, "```\n"]
    entries = []
    for sec in sections(page):
        out.append(f"## {sec.title}\n")
        if sec.text:
            out += ["```{eval-rst}", sec.text, "```\n"]
        out.append("| name | summary | numpy · PyTorch · JAX |")
        out.append("|---|---|---|")
        for name in sec.names:
            obj = _lookup(page.module, name)
            text = VALUES.get(f"{page.module}.{name}") if _is_value(obj) else summary(obj)
            eq = equivalents(page.module, name)
            out.append(f"| {_ref(page.module, name, obj)} | {text or ''} | {' · '.join(_cell(e) for e in eq)} |")
            entries.append((sec.title, name, obj))
        out.append("")
    out.append("## Details\n")
    out.append("```{eval-rst}")
    if page.module not in ("corvid", "corvid.Tensor"):
        out.append(f".. py:module:: {page.module}\n   :no-index:\n")
    if page.module == "corvid.Tensor":
        out.append(".. autoclass:: corvid.Tensor\n   :no-members:\n")
    for _, name, obj in entries:
        out.append(_directive(page.module, name, obj))
    out.append("```\n")
    return "\n".join(out)


def index_markdown() -> str:
    out = ["# API reference\n", "Every public name of corvid, grouped as you would look for it. Each table gives "
           "the name, what it does, and the numpy, PyTorch and JAX names of the same operation where there is "
           "one; the details follow each table.\n",
           "Dtypes and devices: unless its entry says otherwise, a function takes every dtype it has a meaning "
           "for (integers, booleans, float16, bfloat16 and the 8-bit floats computed in float32, float32, float64, "
           "complex64 and complex128) and runs on every device: `CPU`, `CL`, `CUDA` and `WEBGPU` (which has no "
           "float64 or complex128), as the [devices page](../devices.md) says. A tensor's operations run on its "
           "device; mixing devices in one operation is a ValueError naming both.\n",
           "| page | module | names |", "|---|---|---|"]
    for page in PAGES:
        n = sum(len(s.names) for s in sections(page))
        out.append(f"| [{page.title}]({page.slug}.md) | `{page.module}` | {n} |")
    out += ["", "```{toctree}", ":hidden:", ""] + [page.slug for page in PAGES] + ["```", ""]
    return "\n".join(out)


def write_pages(folder) -> list[str]:
    """Write ``index.md`` and a page per :data:`PAGES` entry into ``folder``; their file names."""
    import pathlib

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.md").write_text(index_markdown())
    written = ["index.md"]
    for page in PAGES:
        (folder / f"{page.slug}.md").write_text(page_markdown(page))
        written.append(f"{page.slug}.md")
    return written

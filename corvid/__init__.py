"""corvid: arrays and deep learning compiled into fused kernels.

>>> import corvid as cv
>>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
>>> y = (x * 2 + 1).exp().sum(axis=1)   # builds a graph; nothing runs yet
>>> y.numpy().shape                     # one fused kernel, compiled to C
(2,)
"""

from .dtype import (ALL_DTYPES, DType, bfloat16, can_cast, finfo, float8_e4m3fn, float8_e5m2, float16, float32,
                    float64, iinfo, int8, int16, int32, int64, promote_types, uint8, uint16, uint32, uint64)
from .dtype import bool_ as bool  # noqa: A001  (the Array API name)
from .ops.elementwise import where
from .ops.movement import cat, stack
from .tensor import Tensor, broadcast_shapes, realize, result_type
from .creation import (arange, empty, empty_like, eye, full, full_like, linspace, manual_seed, ones, ones_like,
                       rand, randint, randn, zeros, zeros_like)

__version__ = "0.1.0"
concat = cat
from .transforms.forward import custom_jvp, jacfwd, jvp
from .transforms.batching import vmap
from .autograd import enable_grad, is_grad_enabled, no_grad, stop_gradient
from .transforms.reverse import grad, jacrev, value_and_grad, vjp
from .transforms.custom import checkpoint, custom_vjp
from .transforms.jit import jit  # noqa: E402
from .transforms.forward import hessian
from .ops.indexing import take, take_along_axis, put_along_axis, gather, scatter, scatter_reduce, nonzero, index_select, where  # noqa: E402,F401
from .array_api import *  # noqa: E402,F401,F403
from .ops.sorting import argsort, searchsorted, sort, topk, unique_all, unique_counts, unique_inverse, unique_values; from .ops.scan import cummax, cummin, cumprod, cumsum, cumulative_prod, cumulative_sum, logcumsumexp; from .ops.manipulation import broadcast_arrays, diag, diagonal, diff, expand_dims, frac, meshgrid, moveaxis, nan_to_num, repeat, roll, rot90, swapaxes, tile, trace, tril, triu, unstack  # noqa: E402,F401
from .io import CorruptFileError, load, safe_open, save  # noqa: E402,F401
from .ops.conv import adaptive_avg_pool, adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool, adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, avg_pool, avg_pool1d, avg_pool2d, avg_pool3d, conv, conv1d, conv2d, conv3d, conv_transpose, conv_transpose1d, conv_transpose2d, conv_transpose3d, max_pool, max_pool1d, max_pool2d, max_pool3d; from .ops.einsum import einsum; from .ops.interpolate import interpolate  # noqa: E402,F401
from . import linalg  # noqa: E402,F401
from . import fft  # noqa: E402,F401
from .dtype import complex64, complex128  # noqa: E402,F401
from .ops.elementwise import make_complex as complex  # noqa: E402,F401,A001
from .codegen.search import beam  # noqa: E402,F401
from .runtime.device import default_device, devices, empty_cache, get_default_device, set_default_device  # noqa: E402,F401
from .runtime.denormal import flush_denormal, set_flush_denormal  # noqa: E402,F401
from . import amp  # noqa: E402,F401
from .profiler import profile  # noqa: E402,F401
from .errors import ArgumentError, AxisError, ShapeError  # noqa: E402,F401
from .amp import (autocast, get_float32_matmul_precision, matmul_precision,  # noqa: E402,F401
                  set_float32_matmul_precision)


def __getattr__(name: str):
    """``cv.nn``, ``cv.optim``, ``cv.data``, ``cv.distributed``, ``cv.plot``, ``cv.notebook``,
    ``cv.models`` and ``cv.quant`` (with ``cv.quantize``) are imported on first use (they cost
    import time that array code does not need; plot needs matplotlib), and so is
    ``cv.show_config`` (``corvid.info``, which ``python -m corvid.info`` runs as a script)."""
    if name in ("nn", "optim", "data", "distributed", "plot", "notebook", "models", "quant"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name == "show_config":
        from .info import show_config

        return show_config
    if name == "quantize":  # (corvid.quant, weight-only quantization, imports corvid.nn)
        from .quant import quantize

        return quantize
    raise AttributeError(f"module 'corvid' has no attribute {name!r}")
from .ops import torch_methods as _torch_methods  # noqa: E402,F401  (PyTorch's Tensor methods; last: it overrides)
